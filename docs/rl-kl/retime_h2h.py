"""Independent check (run: python docs/rl-kl/retime_h2h.py SAMPLES.jsonl.gz) of the construction head to head: each model's best script on the tasks
with the largest differences, timed again together, interleaved, by a fresh Evaluator."""
import json, gzip, collections, math, statistics, sys
from codegen.measure import Evaluator
from codegen.workloads import workload
rows = [json.loads(l) for l in gzip.open(sys.argv[1])]
best = collections.defaultdict(dict)
for r in rows:
    if (r['unscheduled_s'] or 0) < 50e-6 or r['status'] != 'correct' or not r['latency_s']:
        continue
    b = best[r['workload']].get(r['model'])
    if b is None or r['latency_s'] < b[0]:
        best[r['workload']][r['model']] = (r['latency_s'], r['script'])
pairs = sorted((m['sft'][0] / m['rl'][0], w) for w, m in best.items() if len(m) == 2)
chosen = pairs[:4] + pairs[-6:]
with Evaluator("llvm", cache=False) as ev:
    for ratio, w in chosen:
        wl = workload(w)
        scripts = [best[w]['sft'][1], best[w]['rl'][1]]
        times = {0: [], 1: []}
        for r in range(5):
            order = [0, 1] if r % 2 == 0 else [1, 0]
            outs = ev.evaluate(wl, [scripts[i] for i in order])
            for i, o in zip(order, outs):
                if o.ok:
                    times[i].append(o.latency_s)
        s, l = statistics.median(times[0]), statistics.median(times[1])
        print(f"{w:60s} eval {ratio:.2f}  again {s / l:.2f}  (sft {s*1e6:.0f} us [{min(times[0])*1e6:.0f}-{max(times[0])*1e6:.0f}], rl {l*1e6:.0f} us [{min(times[1])*1e6:.0f}-{max(times[1])*1e6:.0f}])", flush=True)
