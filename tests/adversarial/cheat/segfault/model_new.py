"""Dereferences a null pointer through ctypes."""
import torch
import torch.nn as nn


import ctypes


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)
        return x
