// test_outlier_detector.cpp — the outlier-pattern detector (adahop/outlier_detector.h): synthetic labels at
// tau = 2, scale invariance, the kurtosis gate, degenerate shapes and NaN input.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adahop/outlier_detector.h"
#include "adahop/pair_analysis.h"
#include "core/error.h"

using namespace lowbit;

TEST(OutlierDetector, LabelsSyntheticOperands) {
    for (Pattern p : {Pattern::row, Pattern::col, Pattern::none})
        for (uint64_t seed : {1u, 2u, 3u}) {
            auto x = synthetic_operand(512, 768, p, seed);
            EXPECT_EQ(detect_outlier_pattern(x.data(), 512, 768).pattern, p) << pattern_name(p) << " seed " << seed;
        }
}

TEST(OutlierDetector, ScaleInvariant) {
    auto x = synthetic_operand(256, 256, Pattern::col, 9);
    const PatternStats a = detect_outlier_pattern(x.data(), 256, 256);
    for (float c : {1e-3f, 7.0f, 1e4f}) {
        std::vector<float> y(x);
        for (float& v : y) v *= c;
        const PatternStats b = detect_outlier_pattern(y.data(), 256, 256);
        EXPECT_EQ(a.pattern, b.pattern);
        EXPECT_NEAR(a.cv_row / a.cv_col, b.cv_row / b.cv_col, 1e-3 * a.cv_row / a.cv_col) << c;
    }
}

TEST(OutlierDetector, GaussianIsNoneAndNormalisationIsNearOne) {
    auto x = synthetic_operand(1024, 512, Pattern::none, 4);
    const PatternStats s = detect_outlier_pattern(x.data(), 1024, 512);
    EXPECT_EQ(s.pattern, Pattern::none);
    // for i.i.d. Gaussian data the normalised CV of the sample variances is ≈ 1
    EXPECT_NEAR(s.cv_row, 1.0, 0.15);
    EXPECT_NEAR(s.cv_col, 1.0, 0.15);
}

TEST(OutlierDetector, KurtosisGate) {
    auto x = synthetic_operand(256, 256, Pattern::row, 5);
    DetectorOptions o;
    o.kappa = 1e9;  // impossible kurtosis: a row pattern is demoted to none
    EXPECT_EQ(detect_outlier_pattern(x.data(), 256, 256, o).pattern, Pattern::none);
    o.kappa = 0.0;
    EXPECT_EQ(detect_outlier_pattern(x.data(), 256, 256, o).pattern, Pattern::row);
}

TEST(OutlierDetector, HandComputedStatistics) {
    // 2x3 matrix: row variances (ddof 1) [1, 4]; column variances [0.5·(1−4)², ...]
    const float x[6] = {1, 2, 3, 2, 4, 6};
    const PatternStats s = detect_outlier_pattern(x, 2, 3);
    // vr = [1, 4]: mean 2.5, std sqrt(4.5) → cv = 0.8485/sqrt(2/2) = 0.8485
    EXPECT_NEAR(s.cv_row, std::sqrt(4.5) / (2.5 + 1e-8), 1e-9);
    // vc = [0.5, 2, 4.5]: mean 7/3, std = sqrt(((0.5−7/3)²+(2−7/3)²+(4.5−7/3)²)/2); normalisation sqrt(2/1)
    const double m = 7.0 / 3.0, sd = std::sqrt(((0.5 - m) * (0.5 - m) + (2 - m) * (2 - m) + (4.5 - m) * (4.5 - m)) / 2);
    EXPECT_NEAR(s.cv_col, sd / (m + 1e-8) / std::sqrt(2.0), 1e-9);
}

TEST(OutlierDetector, DegenerateAndBadInput) {
    const float one_row[4] = {1, 2, 3, 4};
    EXPECT_EQ(detect_outlier_pattern(one_row, 1, 4).pattern, Pattern::none);
    std::vector<float> x(64, 1.0f);
    x[5] = NAN;
    EXPECT_THROW(detect_outlier_pattern(x.data(), 8, 8), Error);
    EXPECT_THROW(detect_outlier_pattern(x.data(), 0, 8), Error);
}
