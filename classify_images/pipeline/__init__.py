"""classify_images.pipeline: from a folder of images to a report, in six sub-packages.

Each imports only the ones listed before it (``tests/test_import_structure.py`` checks it,
counting imports written inside functions):

``settings``    what to compute: configs, command defaults, protocols, the dataset and its split;
``execution``   where the work runs: this machine or a Dask cluster, kernel warm-up, progress;
``storage``     what is written to disk: atomic writes, the output rule, the stage cache, feature sets;
``extraction``  images to feature rows: stages, the fitted extractor, codebook fit, channels, builds;
``training``    feature rows to models and scores: training, evaluation, experiments, model files;
``interfaces``  what users call: the command line, workflows, ``ImageFeatures``, demo, reports.
"""
