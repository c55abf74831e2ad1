/tmp/ptq_trained/llama/llama-imatrix -m /tmp/ptq_trained/model-run/model.gguf -f /work/main/.gpu_pack/pt/ptq/calib_large.txt -c 512 --chunks 512 -t 16 -o /tmp/ptq_trained/compare_512/imatrix.gguf
