"""classify_images.features"""
