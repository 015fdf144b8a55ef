#!/usr/bin/env python3
"""prompt_example: run the worked example of share/prompts/ on a GPU: the reference
(example_ref.py) and the solution prefix + middle + suffix (example_*.py) must agree, so
the prompts never show a model a kernel that does not compile or is wrong. By hand on the
device machine: python3 tests/gpu/prompt_example.py [share/prompts]"""
import os
import sys

import torch

d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..",
                                                        "share", "prompts")


def load(*names):
    src = "\n".join(open(os.path.join(d, n)).read() for n in names)
    ns = {}
    exec(compile(src, "+".join(names), "exec"), ns)
    return ns


ref = load("example_ref.py")
new = load("example_prefix.py", "example_middle.py", "example_suffix.py")
model, model_new = ref["Model"](*ref["get_init_inputs"]()), new["ModelNew"]()
bad = 0
for shape in [(1, 128), (3, 1000), (0,), (4097,)]:
    a, b = torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda")
    ok = torch.equal(model(a, b), model_new(a, b))
    print("%s - example ModelNew == Model on %s" % ("ok" if ok else "not ok", shape))
    bad += not ok
a, b = ref["get_inputs"]()
ok = torch.equal(model(a, b), model_new(a, b))
print("%s - on get_inputs()" % ("ok" if ok else "not ok"))
sys.exit(1 if bad or not ok else 0)
