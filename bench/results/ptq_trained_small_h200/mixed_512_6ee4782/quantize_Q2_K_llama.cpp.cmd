/tmp/ptq_trained/llama/llama-quantize --allow-requantize /tmp/ptq_trained/model-run/model.gguf /tmp/ptq_trained/compare_512/trained-small-Q2_K-llama.cpp.gguf Q2_K 16
