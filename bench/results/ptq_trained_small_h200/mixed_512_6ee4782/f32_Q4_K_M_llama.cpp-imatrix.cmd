/tmp/ptq_trained/llama/llama-quantize --allow-requantize /tmp/ptq_trained/compare_512/trained-small-Q4_K_M-llama.cpp-imatrix.gguf /tmp/ptq_trained/compare_512/f32_Q4_K_M_llama.cpp-imatrix.gguf F32 16
