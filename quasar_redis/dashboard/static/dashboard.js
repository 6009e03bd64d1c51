// Live parts of the quasar dashboard: counts every second, charts every ten seconds.
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

  if (document.querySelector("[data-count]") || document.querySelector("[data-known]")) {
    setInterval(refreshCounts, 1000);
  }
  if (document.getElementById("charts")) {
    setInterval(refreshCharts, 10000);
  }
})();
