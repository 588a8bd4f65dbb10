"""Feature rows to models and scores: training, evaluation, repeated experiments, model files."""
