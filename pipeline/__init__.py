"""classify_images.pipeline"""
