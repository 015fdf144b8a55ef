#!/bin/sh
# test reward for dice-rl --reward cmd: 1 when token 7 occurs in response_ids, else 0
awk '{ r = 0
	if (match($0, /"response_ids": *\[[^]]*\]/)) {
		a = substr($0, RSTART, RLENGTH)
		sub(/^[^[]*\[/, ",", a); sub(/\]$/, ",", a); gsub(/ /, "", a)
		if (index(a, ",7,")) r = 1
	}
	print "{\"reward\": " r "}" }'
