"""studies/colour_channels_survey.py: the variants named on its command line."""

from __future__ import annotations

import colour_channels_survey
import pytest


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("fv-gray", (["fv-gray"], "concat", "linear")),
        ("fv-gray+fv-opponent", (["fv-gray", "fv-opponent"], "concat", "linear")),
        ("fv-gray+fv-opponent:average", (["fv-gray", "fv-opponent"], "average", "linear")),
        ("vq-gray:concat:pmsvm", (["vq-gray"], "concat", "pmsvm")),
        ("vq-gray+vq-opponent:mbkl:mbkl", (["vq-gray", "vq-opponent"], "mbkl", "mbkl")),
    ],
)
def test_a_variant_names_its_channels_rule_and_classifier(variant, expected):
    assert colour_channels_survey.parse_variant(variant) == expected


def test_a_variant_with_too_many_parts_is_refused():
    with pytest.raises(ValueError, match="NAME"):
        colour_channels_survey.parse_variant("a:concat:linear:extra")
