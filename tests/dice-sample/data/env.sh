# sourced by the cases: a tiny random checkpoint with the fixture tokenizer in $t/m
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
dice-sft --init ../data/tiny.json -o "$t/m" -s 3 -t ../data 2>/dev/null || exit 1
export DICE_MODEL="$t/m" DICE_DEVICE=cpu
# field F of every record on stdin (python3 for the JSON), one line per record
field() { python3 -c 'import json,sys
for l in sys.stdin:
    r = json.loads(l)
    for k in sys.argv[1].split("."): r = r.get(k) if isinstance(r, dict) else None
    print(json.dumps(r, sort_keys=True))' "$1"; }
