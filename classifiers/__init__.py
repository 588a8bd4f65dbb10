"""classify_images.classifiers"""
