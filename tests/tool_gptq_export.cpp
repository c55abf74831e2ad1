// tool_gptq_export.cpp — for crosscheck/check_gptq_safetensors.py: writes the GPTQ export of a hand-made
// QuantizedModel (tests/gptq_test_model.h) and, next to it, what every projection must decode to.
//   tool_gptq_export OUT BITS GROUP SYM ZEROS     (GROUP 0 = per channel; SYM 0|1; ZEROS v1|v2)
// OUT/checkpoint/ is the export; OUT/expected/<hf name>.npy (e.g. model.layers.0.self_attn.q_proj.npy) is
// QuantizedWeight::dequantize() of that projection in HF row order, float32 [out, in]; OUT/report.json is
// the export report.
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "gptq_test_model.h"
#include "io/npy.h"
#include "ptq/export_safetensors.h"

using namespace lowbit;

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: tool_gptq_export OUT BITS GROUP SYM ZEROS\n");
        return 2;
    }
    try {
        const std::filesystem::path out = argv[1];
        const GridSpec spec = parse_grid(fmt::format("int{}", argv[2]), std::stoll(argv[3]), std::string(argv[4]) == "1",
                                         GridSearch::minmax);
        test::TestGridChoice choice;
        SafetensorsExportOptions opt;
        if (std::string(argv[5]) == "v2") {
            opt.gptq_zeros = GptqZeroConvention::v2;
            choice.zero_points_of_0 = true;  // what only v2 can hold
        }
        const LlamaConfig c = test::gptq_test_config();
        const QuantizedModel qm = test::random_quantized_model(c, spec, 21, choice);
        const QuantizedExportReport rep =
            export_quantized_safetensors(qm, (out / "checkpoint").string(), SafetensorsPacking::gptq, opt);
        std::filesystem::create_directories(out / "expected");
        for (const BlockTensorSpec& t : block_tensor_specs()) {
            if (t.cols == BlockDim::none) continue;
            for (int64_t l = 0; l < c.n_layers; ++l) {
                const std::string gguf_name = t.gguf_name, hf_name = t.hf_name;  // "attn_q.weight", "self_attn.q_proj.weight"
                const QuantizedWeight& q =
                    qm.linears.at(fmt::format("blk.{}.{}", l, gguf_name.substr(0, gguf_name.rfind(".weight"))));
                std::vector<float> w = q.dequantize();
                if (t.rope_heads > 0)
                    w = permute_qk_rows_to_hf(w, t.rope_heads == 1 ? c.n_heads : c.n_kv_heads, c.head_dim, q.cols);
                const std::string prefix = fmt::format("model.layers.{}.{}", l, hf_name.substr(0, hf_name.rfind(".weight")));
                npy_write_f32((out / "expected" / (prefix + ".npy")).string(), {q.rows, q.cols}, w.data());
            }
        }
        const std::string report = rep.to_json().dump(2) + "\n";
        write_file_atomic((out / "report.json").string(), report.data(), report.size());
        return 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "tool_gptq_export: %s\n", e.what());
        return int(e.kind());
    }
}
