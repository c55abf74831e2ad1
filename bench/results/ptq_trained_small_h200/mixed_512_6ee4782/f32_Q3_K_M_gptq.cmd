/tmp/ptq_trained/llama/llama-quantize --allow-requantize /tmp/ptq_trained/compare_512/trained-small-Q3_K_M-gptq.gguf /tmp/ptq_trained/compare_512/f32_Q3_K_M_gptq.gguf F32 16
