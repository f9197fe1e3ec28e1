"""Loss masks: which tokens of a token dataset are training targets.

A dataset directory may hold a sibling mask dataset in `<dir>/loss_mask/`: a token dataset of
vocab_size 2 with exactly the same document lengths, 1 where the token is a target (a response
token in SFT data) and 0 where it is not (a prompt). Packed with the same spec as its tokens, it
lines up with them sample for sample, since packing depends on document lengths only.
"""

from pathlib import Path

import numpy as np

from shipyard.errors import InvalidInput
from shipyard.loader.dataset import TokenDataset

LOSS_MASK_DIR = "loss_mask"


def open_loss_mask(dataset: TokenDataset) -> TokenDataset | None:
    """`dataset`'s mask dataset, checked against it; None when it has none."""
    directory = Path(dataset.directory) / LOSS_MASK_DIR
    if not directory.exists():
        return None
    mask = TokenDataset(directory)
    if mask.vocab_size != 2:
        raise InvalidInput(f"loss mask {directory}: vocab_size is {mask.vocab_size}, expected 2")
    tokens, masks = dataset.doc_lengths, mask.doc_lengths
    if len(tokens) != len(masks):
        raise InvalidInput(
            f"loss mask {directory}: {len(masks)} documents, but {dataset.directory} has "
            f"{len(tokens)}"
        )
    differ = np.flatnonzero(tokens != masks)
    if len(differ):
        doc = int(differ[0])
        raise InvalidInput(
            f"loss mask {directory}: document {doc} has {int(masks[doc])} mask values for "
            f"{int(tokens[doc])} tokens in {dataset.directory}"
        )
    return mask
