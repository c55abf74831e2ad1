// test_model_hf_export.cpp — the HF export (model/hf_export.h): q/k rows un-permuted to HF order, single
// file and sharded layouts, the exported checkpoint read back to the same logits, and the export of a
// model in memory.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "io/corpus.h"
#include "model/hf_export.h"
#include "model/weights.h"
#include "model_test_util.h"

using namespace lowbit;
using namespace lowbit::test;

TEST(ModelFiles, HfExportUnpermutesAndReadsBack) {
    for (bool bias : {false, true}) {
        const LlamaModel hf = tiny_model(bias, !bias, 51);
        const std::string gguf = temp_path("exp.gguf"), dir = temp_path(fmt::format("hf{}", int(bias)));
        if (bias)
            write_model_gguf(hf, "qwen2", gguf);
        else
            write_model_gguf(to_gguf_layout(hf), "llama", gguf);
        // Tiny shards force the sharded layout (index + several files).
        const HfExportReport rep = export_hf_checkpoint(*ModelReader::open(gguf), dir, bias ? kHfShardBytes : 40000);
        EXPECT_EQ(rep.unpermuted_qk, !bias);
        EXPECT_EQ(std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors.index.json"), !bias);
        const auto reader = ModelReader::open(dir);
        EXPECT_EQ(reader->format(), "safetensors");
        EXPECT_EQ(reader->config().architecture, bias ? "qwen2" : "llama");
        EXPECT_EQ(reader->config().rope_pairing, RopePairing::halves);
        // The exported q/k rows are the HF originals, exactly.
        EXPECT_EQ(reader->block(1).wq, hf.weights.blocks[1].wq);
        EXPECT_EQ(reader->block(2).wk, hf.weights.blocks[2].wk);
        if (bias) {
            EXPECT_EQ(reader->block(0).bk, hf.weights.blocks[0].bk);
        }
        const LlamaModel back = load_llama_model(*reader);
        const int64_t T = 9;
        const std::vector<int32_t> tok = random_tokens(T, hf.config.vocab_size, 12);
        EXPECT_EQ(forward_logits(back, tok.data(), {1, T}), forward_logits(hf, tok.data(), {1, T}));
        std::remove(gguf.c_str());
        std::filesystem::remove_all(dir);
    }
}

// The export of a model in memory (what a quantizer hands over) writes the same files as the export that
// reads the same weights from a GGUF.
TEST(ModelFiles, HfExportFromMemoryEqualsExportFromTheFile) {
    const LlamaModel gguf_layout = to_gguf_layout(tiny_model(false, true, 52));
    const std::string gguf = temp_path("mem.gguf"), from_file = temp_path("hf_file"), from_memory = temp_path("hf_mem");
    write_model_gguf(gguf_layout, "llama", gguf);
    const HfExportReport a = export_hf_checkpoint(*ModelReader::open(gguf), from_file);
    const HfExportReport b = export_hf_checkpoint(gguf_layout, from_memory);
    EXPECT_EQ(a.files, b.files);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_TRUE(b.unpermuted_qk);
    for (const std::string& f : a.files) {
        const std::string ca = read_text_file((std::filesystem::path(from_file) / f).string());
        const std::string cb = read_text_file((std::filesystem::path(from_memory) / f).string());
        EXPECT_FALSE(ca.empty()) << f;
        EXPECT_TRUE(ca == cb) << f << " differs";
    }
    std::remove(gguf.c_str());
    std::filesystem::remove_all(from_file);
    std::filesystem::remove_all(from_memory);
}
