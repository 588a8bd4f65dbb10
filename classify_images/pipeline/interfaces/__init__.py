"""What users call: the command line, the library workflows, ImageFeatures, the demo and the reports."""
