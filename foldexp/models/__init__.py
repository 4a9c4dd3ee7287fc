"""Models assembled from blocks: cells (plain ``nn.Module``s) and block graphs built from them."""
