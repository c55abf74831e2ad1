// test_plot.cpp — the figure module: PNG structure (signature, chunk CRCs, IHDR) checked here and its
// pixels decoded by an independent inflater (Python's zlib) where python3 is on the PATH; SVG well-formed
// (a small tag-balance check here, Python's XML parser too); a heatmap cell has its colour; a series line
// passes through the pixel of a data point; unknown extensions are refused.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "io/npy.h"
#include "io/plot.h"

using namespace lowbit;

namespace {

Heatmap two_by_two() {
    Heatmap h;
    h.title = "test map";
    h.value_label = "SQNR (dB)";
    h.row_labels = {"row a", "row b"};
    h.col_labels = {"left", "right"};
    h.values = {{0.0, 10.0}, {5.0, NAN}};
    return h;
}

LinePlot diagonal() {
    LinePlot p;
    p.title = "loss";
    p.x_label = "step";
    p.y_label = "loss";
    p.series.push_back({"train", {0, 2, 4, 6, 8, 10}, {0, 2, 4, 6, 8, 10}});
    p.series.push_back({"eval", {0, 10}, {10, 0}});
    return p;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
    return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | b[at + 3];
}

// Bitwise CRC-32 (independent of the table-driven one in plot.cpp).
uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

struct Chunk {
    std::string type;
    std::vector<uint8_t> data;
};

std::vector<Chunk> png_chunks(const std::vector<uint8_t>& png) {
    const uint8_t sig[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    EXPECT_GE(png.size(), 8u);
    EXPECT_TRUE(std::equal(sig, sig + 8, png.begin()));
    std::vector<Chunk> out;
    for (size_t at = 8; at + 12 <= png.size();) {
        const uint32_t len = be32(png, at);
        EXPECT_LE(at + 12 + len, png.size());
        Chunk c{std::string(png.begin() + long(at) + 4, png.begin() + long(at) + 8),
                std::vector<uint8_t>(png.begin() + long(at) + 8, png.begin() + long(at) + 8 + len)};
        EXPECT_EQ(be32(png, at + 8 + len), crc32_bitwise(&png[at + 4], len + 4)) << "CRC of chunk " << c.type;
        out.push_back(std::move(c));
        at += 12 + len;
    }
    return out;
}

// A figure's series colour on or next to (x, y): the pen is 2 px wide, so allow its neighbours.
bool colour_near(const Image& img, double x, double y, Rgb c) {
    for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
            if (img.pixel(int(std::floor(x)) + dx, int(std::floor(y)) + dy) == c) return true;
    return false;
}

// Every tag closed in order, attribute values quoted, '&' only as an entity.
bool svg_well_formed(const std::string& s) {
    std::vector<std::string> open;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '&') {
            const size_t semi = s.find(';', i);
            const std::string ent = s.substr(i, semi == std::string::npos ? 0 : semi - i + 1);
            if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;") return false;
        }
        if (s[i] != '<') continue;
        const size_t end = s.find('>', i);
        if (end == std::string::npos) return false;
        std::string tag = s.substr(i + 1, end - i - 1);
        if (std::count(tag.begin(), tag.end(), '"') % 2) return false;
        if (tag[0] == '/') {
            if (open.empty() || open.back() != tag.substr(1)) return false;
            open.pop_back();
        } else if (tag.back() != '/') {
            open.push_back(tag.substr(0, tag.find(' ')));
        }
        i = end;
    }
    return open.empty();
}

std::filesystem::path temp_dir() {
    auto d = std::filesystem::temp_directory_path() / ("lowbit_test_plot_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
}

bool have_python() { return std::system("python3 -c 'import zlib, xml.dom.minidom' >/dev/null 2>&1") == 0; }

}  // namespace

TEST(Plot, PngHasSignatureValidChunksAndTheImageSize) {
    const Image img = render_image(two_by_two());
    const auto chunks = png_chunks(encode_png(img));
    ASSERT_EQ(chunks.size(), 3u);
    EXPECT_EQ(chunks[0].type, "IHDR");
    EXPECT_EQ(chunks[1].type, "IDAT");
    EXPECT_EQ(chunks[2].type, "IEND");
    ASSERT_EQ(chunks[0].data.size(), 13u);
    EXPECT_EQ(be32(chunks[0].data, 0), uint32_t(img.width));
    EXPECT_EQ(be32(chunks[0].data, 4), uint32_t(img.height));
    EXPECT_EQ(chunks[0].data[8], 8);  // bit depth
    EXPECT_EQ(chunks[0].data[9], 2);  // RGB
    // The flat areas compress: far below the 3 bytes per pixel of the raw image.
    EXPECT_LT(chunks[1].data.size(), img.rgb.size() / 10);
}

TEST(Plot, HeatmapCellsHaveTheirColours) {
    const Heatmap h = two_by_two();
    const Image img = render_image(h);
    const HeatmapGrid g = heatmap_grid(h);
    // A point inside a cell but away from its centred text: a quarter in from the left edge, near the top.
    auto cell = [&](int r, int c) {
        return img.pixel(int(g.left + (c + 0.1) * g.cell_width), int(g.top + (r + 0.2) * g.cell_height));
    };
    EXPECT_EQ(cell(0, 0), heatmap_colour(0.0));   // the minimum: red
    EXPECT_EQ(cell(0, 1), heatmap_colour(1.0));   // the maximum: green
    EXPECT_EQ(cell(1, 0), heatmap_colour(0.5));   // the middle: yellow
    EXPECT_EQ(cell(1, 1), (Rgb{200, 200, 200}));  // NaN: grey
    Heatmap lower = h;
    lower.higher_is_better = false;
    const Image img2 = render_image(lower);
    EXPECT_EQ(img2.pixel(int(g.left + 0.1 * g.cell_width), int(g.top + 0.2 * g.cell_height)), heatmap_colour(1.0));
}

TEST(Plot, SeriesPassThroughTheirDataPoints) {
    const LinePlot p = diagonal();
    const Image img = render_image(p);
    const PlotFrame f = line_plot_frame(p);
    EXPECT_EQ(f.x_lo, 0);
    EXPECT_EQ(f.x_hi, 10);
    for (double v : {1.0, 3.0, 7.0}) EXPECT_TRUE(colour_near(img, f.to_px(v), f.to_py(v), series_colour(0))) << v;
    // The two lines cross at (5, 5); the second is drawn last, on top.
    EXPECT_TRUE(colour_near(img, f.to_px(5), f.to_py(5), series_colour(1)));
    EXPECT_TRUE(colour_near(img, f.to_px(2), f.to_py(8), series_colour(1)));
    // Nothing of series 0 far from its diagonal, e.g. at (8, 2) (below the legend).
    EXPECT_FALSE(colour_near(img, f.to_px(8), f.to_py(2), series_colour(0)));
}

TEST(Plot, LogAxisPlacesDecadesEvenly) {
    LinePlot p;
    p.log_y = true;
    p.series.push_back({"loss", {0, 1, 2, 3}, {1000, 100, 10, 1}});
    p.series[0].y.push_back(-1);  // not drawable on a log axis: skipped, not an error
    p.series[0].x.push_back(4);
    const PlotFrame f = line_plot_frame(p);
    EXPECT_DOUBLE_EQ(f.y_lo, 1);
    EXPECT_DOUBLE_EQ(f.y_hi, 1000);
    EXPECT_NEAR(f.to_py(10) - f.to_py(100), f.to_py(100) - f.to_py(1000), 1e-9);
    const Image img = render_image(p);
    EXPECT_TRUE(colour_near(img, f.to_px(1.5), (f.to_py(100) + f.to_py(10)) / 2, series_colour(0)));
}

TEST(Plot, SvgIsWellFormedAndEscapesText) {
    Heatmap h = two_by_two();
    h.title = "a < b & \"c\"";
    for (const Figure& fig : {Figure{h}, Figure{diagonal()}}) {
        const std::string svg = render_svg(fig);
        EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
        EXPECT_TRUE(svg_well_formed(svg)) << svg.substr(0, 400);
    }
    EXPECT_NE(render_svg(h).find("a &lt; b &amp; &quot;c&quot;"), std::string::npos);
}

TEST(Plot, WriteFigureChoosesTheFormatByExtension) {
    const auto dir = temp_dir();
    write_figure((dir / "m.svg").string(), two_by_two());
    write_figure((dir / "m.PNG").string(), two_by_two());
    EXPECT_EQ(read_file((dir / "m.svg").string())[0], '<');
    EXPECT_EQ(read_file((dir / "m.PNG").string())[0], 0x89);
    try {
        write_figure((dir / "m.gif").string(), two_by_two());
        FAIL() << "a .gif path was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::usage);
        EXPECT_NE(std::string(e.what()).find(".svg or .png"), std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

// Independent decoders: Python's zlib inflates our deflate stream and un-filters the rows; its pixels must
// equal the image we encoded. Python's XML parser reads both SVGs.
TEST(Plot, PythonDecodesThePngAndParsesTheSvg) {
    if (!have_python()) GTEST_SKIP() << "python3 not on the PATH";
    const auto dir = temp_dir();
    for (const Figure& fig : {Figure{two_by_two()}, Figure{diagonal()}}) {
        const Image img = render_image(fig);
        const auto png = encode_png(img);
        write_file_atomic((dir / "f.png").string(), png.data(), png.size());
        write_file_atomic((dir / "f.rgb").string(), img.rgb.data(), img.rgb.size());
        const std::string svg = render_svg(fig);
        write_file_atomic((dir / "f.svg").string(), svg.data(), svg.size());
        const std::string script = R"PY(
import struct, sys, zlib, xml.dom.minidom
d = sys.argv[1]
png = open(d + '/f.png', 'rb').read()
w, h = struct.unpack('>II', png[16:24])
at, idat = 8, b''
while at < len(png):
    n, = struct.unpack('>I', png[at:at + 4])
    if png[at + 4:at + 8] == b'IDAT': idat += png[at + 8:at + 8 + n]
    at += 12 + n
raw = zlib.decompress(idat)
stride = 3 * w
assert len(raw) == h * (stride + 1), (len(raw), h, stride)
out = bytearray()
for y in range(h):
    f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    assert f == 1, f
    for i in range(3, stride): row[i] = (row[i] + row[i - 3]) & 255
    out += row
assert bytes(out) == open(d + '/f.rgb', 'rb').read(), 'pixels differ'
xml.dom.minidom.parse(d + '/f.svg')
)PY";
        std::ofstream((dir / "check.py").string()) << script;
        const std::string cmd = "python3 " + (dir / "check.py").string() + " " + dir.string();
        EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    std::filesystem::remove_all(dir);
}
