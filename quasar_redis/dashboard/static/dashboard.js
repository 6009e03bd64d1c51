// Live parts of the quasar dashboard: counts every second, charts every ten seconds; and the
// selection of a queue's jobs (select all on the page, how many are selected).
// Values are set with textContent (never parsed as HTML); the charts' fragment is rendered,
// and escaped, by the server.
(function () {
  "use strict";
  var root = document.body.dataset.root || "";

  function sameKeys(known, names) {
    var had = known ? known.split("|").sort() : [];
    return had.join("|") === names.slice().sort().join("|");
  }

  function refreshCounts() {
    fetch(root + "/api/counts", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        var known = document.querySelector("[data-known]");  // the overview: every queue
        if (known && !sameKeys(known.dataset.known, Object.keys(data.queues))) {
          window.location.reload();  // a queue came or went
          return;
        }
        document.querySelectorAll("[data-count]").forEach(function (el) {
          var parts = el.dataset.count.split("|");
          var queue = data.queues[parts[0]];
          if (queue && queue[parts[1]] !== undefined) {
            var text = String(queue[parts[1]]);
            if (el.textContent !== text) { el.textContent = text; }
          }
        });
        document.querySelectorAll("[data-paused]").forEach(function (el) {
          var queue = data.queues[el.dataset.paused];
          if (queue) { el.hidden = !queue.paused; }
        });
        document.querySelectorAll("[data-running]").forEach(function (el) {
          var queue = data.queues[el.dataset.running];
          if (queue) { el.hidden = queue.paused; }
        });
      })
      .catch(function () { /* the next refresh tries again */ });
  }

  function refreshCharts() {
    var box = document.getElementById("charts");
    if (!box) { return; }
    fetch(box.dataset.refresh, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) { box.innerHTML = html; } })
      .catch(function () { /* the next refresh tries again */ });
  }

  function watchSelection() {
    var all = document.getElementById("select-all");
    var form = document.getElementById("selection");
    if (!all || !form) { return; }
    var picks = form.querySelectorAll("input.pick");
    var count = document.getElementById("selected-count");
    var buttons = form.querySelectorAll(".bulk button");
    function update() {
      var n = 0;
      picks.forEach(function (box) { if (box.checked) { n += 1; } });
      all.checked = n > 0 && n === picks.length;
      all.indeterminate = n > 0 && n < picks.length;
      count.textContent = n ? n + " selected" : "";
      buttons.forEach(function (b) { b.disabled = n === 0; });
    }
    all.addEventListener("change", function () {
      picks.forEach(function (box) { box.checked = all.checked; });
      update();
    });
    picks.forEach(function (box) { box.addEventListener("change", update); });
    update();
  }

  watchSelection();
  if (document.querySelector("[data-count]") || document.querySelector("[data-known]")) {
    setInterval(refreshCounts, 1000);
  }
  if (document.getElementById("charts")) {
    setInterval(refreshCharts, 10000);
  }
})();
