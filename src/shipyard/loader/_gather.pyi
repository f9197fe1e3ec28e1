import numpy as np
import numpy.typing as npt

def widen_into(
    addresses: npt.NDArray[np.uint64],
    bounds: npt.NDArray[np.int64],
    lo: int,
    itemsize: int,
    rows: npt.NDArray[np.intp],
    seq_len: int,
    out: npt.NDArray[np.int64],
) -> None: ...
