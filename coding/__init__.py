"""classify_images.coding"""
