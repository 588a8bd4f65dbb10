"""studies/config_walk.py: the walk of ``codebook.kind`` and of ``C`` from the command line to the model file."""

from __future__ import annotations

import config_walk

from classify_images.pipeline.settings.config import CodebookConfig, PipelineConfig


def test_the_kind_is_read_where_the_config_is_turned_into_objects_only():
    plain_codebook_params = PipelineConfig.codebook_params
    kind, c = config_walk.walk()
    stops = {(stop["module"], stop["function"]) for stop in kind["walk"]}
    assert ("pipeline/settings/plan.py", "make_feature_plan") in stops
    # the rooms of the build half take the plan: none reads the kind out of the configuration
    rooms = {module for module, _ in stops}
    assert not rooms & {
        "pipeline/extraction/build.py",
        "pipeline/extraction/build_steps.py",
        "pipeline/extraction/fitting.py",
        "pipeline/extraction/extractor.py",
        "pipeline/training/model_file.py",
    }
    assert kind["stops"] == len(kind["walk"]) and kind["modules"] == len(rooms)
    # C reaches the model file through the estimator
    assert ("pipeline/training/model_file.py", "save_model") in {(s["module"], s["function"]) for s in c["walk"]}
    # every probe is undone
    assert PipelineConfig.codebook_params is plain_codebook_params
    assert "__getattribute__" not in vars(CodebookConfig)
