"""The text of docs/performance.md; ``benchmarks.report`` fills in the numbers of a run."""

METHOD = """\
# Performance

_Written by `python3 benchmarks/run.py --write-docs`: to change the text edit
`benchmarks/method.py`, to change the numbers rerun the benchmark. Nothing here is typed by hand._

Measured on {date} at commit {commit} with

```sh
{command}
```

**Machine**: {machine}. The run took {minutes:.0f} minutes.

Absolute numbers vary by machine (CPU, kernel, Redis build, whatever else runs there); the ratios
between systems measured on the same machine and the same server vary much less, and they are what
this comparison is about. Redis, the producer and the worker process all share the machine's
{nproc} cores here, so a system whose worker burns more CPU also leaves less of it to Redis. A
load average above the number of cores means that other processes competed for the CPU during the
run; the min–max spreads show how much that moved each figure.

![Throughput per system (log scale), median with min–max](performance.png)

## Results

Every figure is the median of {runs} run(s), with the min–max of the runs in brackets; systems
take turns within each run. "n/a": the system has no such API.

### Throughput (jobs per second, higher is better)

{throughput}

### Latency and cost (lower is better)

{costs}

### quasar against each peer

Each cell is how many times better quasar does: quasar ÷ peer for throughput, peer ÷ quasar for
latency, memory and CPU. Above 1 quasar is better, below 1 the peer is.

{peers}

### The ceiling

What Redis itself reaches on the same server with a minimal Lua script, `{script}`, called with
a fresh key and a 100-byte value each time: by redis-py one call at a time, by redis-py in
pipelines of 100 calls, and by `redis-benchmark` ({s_ceiling_clients} clients, {s_ceiling_benchmark}
calls). No job queue can beat these: every enqueue is at least one such script call, every
processed job at least two (claim and complete). Its memory is not a floor for a job's: a value
over `hash-max-listpack-value` (64 bytes by default) turns its hash into a hash table, where
quasar keeps a payload in 64-byte chunks and its hash in the smaller listpack encoding.

{ceiling}

### quasar against the ceiling

Throughput as a fraction of the ceiling's calls per second (one at a time against one call at a
time, bulk against pipelined, concurrent producers and workers against `redis-benchmark`); latency,
claim cost, memory and CPU as a multiple of the ceiling's (one round trip, one minimal call, one
HSET+ZADD entry).

{against}

### One job at a time

Most producers enqueue one job per web request. What quasar's one-at-a-time path is held to,
each as measured in this run: a single enqueue through a task (`task.enqueue`, `await
task.aenqueue`) against every peer and against the ceiling's one call at a time (the two taking
turns on the same server, in blocks of 100 calls, A B B A, so that whatever else the machine runs
meanwhile weighs on both alike; the ratio of the two phases measured apart, minutes from each
other, is given beside it); the Redis CPU it
costs against the bare single write of `benchmarks/floors.py`, run on the same server right after
it: a script that writes the same jobs' hashes and `ready` entries as quasar lays them out, one
job a call, and nothing else (no checks, sequence, wake-up or event); its enqueue-to-start p99
against huey's; the memory of a waiting job, beside what the bare single write's jobs take.

{one_at_a_time}

### Claim cost against the number of waiting jobs

quasar only. The queue is filled with {s_claim_small} and then {s_claim_large} waiting jobs (plus
the jobs the measurement claims, so that the count never drops below), and `claim` is called
{s_claims} times one after the other, {s_claim_reps} rounds after one round that is not counted;
each figure is the median round (the
client's time per call, and the time inside Redis per call from `INFO commandstats`). The
claim script finds the best job with `ZRANGE` on the queue's ready index, a sorted set (O(log N)),
and touches only the job it leases, so the time inside Redis hardly moves while the queue grows a
thousandfold.

{claim}

### Groups and limits

quasar only, measured apart by `benchmarks/flow.py`, which starts a server of its own: claim and
complete (`claim_many` of 50, `report_many`) of 20,000 jobs in one queue with neither groups nor
limits, in 10,000 groups, and in those groups with every limit set and none reached. With
`--callgrind` it counts the CPU instructions Redis spends inside the scripts per job (exact, and
blind to a busy machine); without, the microseconds of `INFO commandstats`. The figures of its
last run, and the cost of a queue without groups or limits before and after them
(`benchmarks/lua_cost.py --checkout`), are in [flow-control.md](flow-control.md#what-it-costs).

## Systems and settings

Each system is installed from PyPI into its own virtualenv (`benchmarks/.venvs/NAME`, latest
versions at the time of the run, with hiredis) and uses its documented API: its own producer
calls, its own worker class with its own defaults, in one worker process (started the way each
command-line worker starts its worker in one process; dramatiq's and huey's supervisors are left
out). "Tuned" raises only the concurrency setting of that one process. No system writes a log
line per job: rq's worker is given `logging_level="WARNING"`, the others log per job at INFO
through `logging`, which has no handler here.

{settings}

{notes}

## How each figure is measured

- **The server**: one `redis-server` started by the benchmark on a free loopback port with
  `--save "" --appendonly no`, shared by every system and the ceiling, flushed before each figure
  and stopped by its pid at the end.
- **The job**: every system runs the same no-op task on the same 100-character string payload
  (in each system's own encoding). The task body adds one to a counter in a memory-mapped file
  that the harness reads: counting costs no Redis command and no sleep, and works the same for
  asyncio tasks, threads and forked children.
- **Enqueue, one at a time**: one producer, {s_enqueue} jobs (or {s_phase_cap} s), each call
  waiting for its reply. Systems with only an asyncio API await one call at a time. quasar
  enqueues through a task of an `App` (`task.enqueue(data)`), as an application does.
- **Enqueue, asyncio, one awaited at a time**: the same, by the system's asyncio API (quasar:
  `await task.aenqueue(data)`), each call awaited before the next.
- **Enqueue, asyncio**: {s_async_concurrency} coroutines sharing {s_async_enqueue} jobs, each
  awaiting its own calls; the clients' connections are opened before the clock starts.
- **Bulk enqueue**: {s_bulk} jobs in calls of {s_chunk}, with the system's bulk API.
- **Process**: the queue is pre-filled with {s_process} jobs (fewer if filling takes over
  {s_fill_cap} s), then one worker process is started. The clock starts when the first job has
  run (worker start-up is not timed) and stops when every job has run and Redis shows them all
  finished, or after {s_process_cap} s; the rate is the jobs run in between over the time.
- **Latency**: a worker is started and left idle (a warm-up job runs, then 0.5 s passes); then
  {s_latency} jobs are enqueued one every {interval_ms:g} ms. Each job's latency is the time its
  task starts minus the time just before its enqueue call (same machine, same clock), so it
  includes the enqueue round trip and the worker's pick-up delay. p50 and p99 are nearest-rank
  percentiles of a run's jobs (the p99 of {s_latency}: the {p99_rank} slowest), and the figure is
  the median of the runs'.
- **Memory per waiting job**: `used_memory` less the clients' buffers (`mem_clients_normal`,
  which move by tens of kilobytes with the traffic) after the one-at-a-time enqueue minus
  before, divided by the jobs. It counts everything a system keeps per enqueued job: for quasar
  the job hash, its `ready` entry and an entry of the event stream (it keeps about the last
  10,000 job changes).
- **Redis CPU**: the change of `used_cpu_sys + used_cpu_user` (INFO) divided by the jobs: over
  the one-at-a-time enqueue, and over a process figure from the worker's start to its end (so it
  includes the worker's start-up, polling and maintenance). The time spent inside commands
  (`INFO commandstats`) per job is in `benchmarks/results/latest.json` too
  (`redis_command_us_per_*`).
- **Runs**: {runs}, systems taking turns within a run; the claim-cost figures are taken in the
  first run only (filling a million jobs takes a while).

## Failures and systems not measured

{failures}
"""
