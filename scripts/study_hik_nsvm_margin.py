"""Study: HIK nSVM on a feature set (e.g. the hik-nsvm rows) with margin 0.02 (the default of 2026-11-21) vs "auto" (today's), the 3 splits of bench_config_table.

Usage: python scripts/study_hik_nsvm_margin.py FEATURE_SET
"""
import sys
sys.path.insert(0, "scripts")
import numpy as np
import bench_config_table as T
import _bench_utils as U
from classify_images.classifiers.hik_nsvm import HIKnSVM

feats = U.load_features(sys.argv[1]); X, y = feats.pooled()
n_classes = int(y.max()) + 1
for margin in (0.02, "auto"):
    T._estimator = (lambda m: (lambda name: HIKnSVM(random_state=0, margin=m)))(margin)
    cell = T.run_cell("nsvm", X, y, n_classes, 3, 100, 1e-3)
    print("margin", margin, [round(100 * r["accuracy"], 2) for r in cell["runs"]], round(cell["mean"], 2), round(cell["std"], 2), flush=True)
