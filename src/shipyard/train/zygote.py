"""Imported only by the spares' fork server (`forked`): it pays a rank's start-up once — torch,
dynamo, a first forward and backward, the Hugging Face stack a fine-tune loads its model with —
and every spare forked from it starts warm. (The model itself is read after the fork.)"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: no OpenMP threads to fork over

from shipyard.train.worker import warm_up, warm_up_hf  # after the thread setting above

warm_up()
warm_up_hf()
