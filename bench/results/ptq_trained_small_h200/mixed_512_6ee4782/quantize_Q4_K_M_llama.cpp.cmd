/tmp/ptq_trained/llama/llama-quantize --allow-requantize /tmp/ptq_trained/model-run/model.gguf /tmp/ptq_trained/compare_512/trained-small-Q4_K_M-llama.cpp.gguf Q4_K_M 16
