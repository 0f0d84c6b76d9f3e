"""What runs a scheduled batch: the Llama-style torch model, its runner and CUDA graphs.

Importing this package loads nothing; its modules import torch.
"""
