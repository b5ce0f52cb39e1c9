"""The model: what the paper defines, as torch modules (Peters et al. 2018, sections 3.1-3.2).

Options (bilm-tf's `options.json` keys, `options.py`), character ids (`characters.py`), the
char CNN with highway and projection (`char_cnn.py`) and its training path
(`char_cnn_training.py`), the LSTM recurrence with every path that runs it
(`recurrence/`) and the fused kernels of the gradient paths (`kernels.py`), the biLM
(`bilm.py`), and `Elmo` with its scalar mix
(`elmo.py`). `capture.py` switches to the plain path when a graph is captured for deployment.
Lowest layer: imports nothing else of `elmo_core`. A `BiLM` is built with
its parts (the recurrence, the layer-0 cache, the char CNN's training path); without them
it runs the step loop, with no cache. The loaders pass the runtime's (`elmo_core.runtime.parts`).

The names users need are in `elmo_core`; this package re-exports nothing.
"""

__all__: list[str] = []
