# verdicts.py [FIELD...]: one line per kbench-eval record, "id compiled correct error" and
# the named eval fields; a stdout line that is not a JSON record is an error.
import json
import sys

for n, line in enumerate(sys.stdin, 1):
    try:
        rec = json.loads(line)
        ev = rec["eval"]
    except (ValueError, KeyError):
        print("line %d is not an evaluated record: %.60r" % (n, line))
        sys.exit(1)
    out = [str(rec.get("id")), "compiled=%s" % ev["compiled"], "correct=%s" % ev["correct"],
           "error=%s" % ev["error"]]
    for f in sys.argv[1:]:
        out.append("%s=%s" % (f, ev.get(f)))
    print(" ".join(out))
