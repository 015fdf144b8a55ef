#!/bin/sh
# bench/sdar-config.sh GEOM: print the config.json of an SDAR geometry (1.7b, 4b, 8b; untied
# lm_head, HD 128, 8 KV heads, vocab 151936, block 4) for `dice-sft --init`, as the benches use
case ${1:-} in
1.7b) c=2048 l=28 h=16 i=6144 ;;
4b) c=2560 l=36 h=32 i=9728 ;;
8b) c=4096 l=36 h=32 i=12288 ;;
*) echo "sdar-config.sh: unknown geometry '${1:-}' (1.7b, 4b, 8b)" >&2; exit 2 ;;
esac
cat <<J
{"model_type": "sdar", "vocab_size": 151936, "hidden_size": $c, "num_hidden_layers": $l,
 "num_attention_heads": $h, "num_key_value_heads": 8, "head_dim": 128,
 "intermediate_size": $i, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
 "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "block_size": 4,
 "mask_token_id": 151669, "bos_token_id": 151643, "eos_token_id": 151645,
 "pad_token_id": 151643, "torch_dtype": "float32"}
J
