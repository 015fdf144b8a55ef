# mkrec.py PROBLEM CANDIDATE...: one candidate record per file (id = file name without .py),
# for the kbench-eval tests. A CANDIDATE of the form PROBLEM=FILE overrides the problem.
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
cands = os.path.join(here, "..", "fixtures", "kbench-candidates")
problem = sys.argv[1]
for arg in sys.argv[2:]:
    prob = problem
    if "=" in arg:
        prob, arg = arg.split("=", 1)
    with open(os.path.join(cands, arg)) as f:
        src = f.read()
    print(json.dumps({"id": os.path.basename(arg)[:-3], "problem": prob, "kernel": src}))
