"""llama.cpp and the machine: the only part of specchat that calls llama-cpp-python.

Models and contexts (``model.py``, with the settings they load with, ``model_settings.py``, and
the library handle, ``llama_lib.py``), what the hardware offers and how a pair is placed on it
(``hardware``, ``amx``, ``blas``, ``offload``, ``placement``, ``memory_plan``, ``load_report``,
``batch_rounding``, ``machine_load``), hidden states for the drafters that read them, the
vocabulary's raw pieces (``vocab``), and llama.cpp's RPC backend (``rpc``).
"""
