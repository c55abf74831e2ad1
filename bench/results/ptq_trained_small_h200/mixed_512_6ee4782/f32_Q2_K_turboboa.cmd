/tmp/ptq_trained/llama/llama-quantize --allow-requantize /tmp/ptq_trained/compare_512/trained-small-Q2_K-turboboa.gguf /tmp/ptq_trained/compare_512/f32_Q2_K_turboboa.gguf F32 16
