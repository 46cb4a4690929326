import json, glob, sys
sys.path.insert(0, '.')
from training.evaluate.metrics import head_to_head, slow_tasks, summarize
rows = [json.loads(l) for p in glob.glob('runs/s15/evalr/samples/*/*.jsonl') for l in open(p) if l.strip()]
both = {r['task'] for r in rows if r['model'] == 'sft'} & {r['task'] for r in rows if r['model'] == 'rl'}
keep = slow_tasks(rows, 50e-6) & both
rows = [r for r in rows if r['task'] in keep]
print('tasks', len(keep))
print(head_to_head(rows, 'rl', 'sft', 'refinement'))
s = summarize(rows)
for m in s:
    f = s[m]['refinement']
    print(m, 'correct %.3f best %.2f over start %.2f improved %s stmts %s tile %.3f' % (f['correct'], f['best_speedup_geomean'], f.get('best_over_start_geomean') or 0, f.get('faster_than_start'), f['scripts']['statements_median'], f['scripts']['tile']))
