"""The lowest layer: what every other layer may use and nothing here imports from above.

* :mod:`~gpumodel.base.errors` - the exceptions and warnings (each error carries ``argument``, ``value``, ``allowed``);
* :mod:`~gpumodel.base.units` - readable units at the YAML boundary, SI inside;
* :mod:`~gpumodel.base.numeric` - whole, positive and broadcastable numeric arguments;
* :mod:`~gpumodel.base.readable` - counts, byte sizes and durations as people write them;
* :mod:`~gpumodel.base.arguments` - flags, choices, paths, options passed on, renamed and keyword-only arguments;
* :mod:`~gpumodel.base.reprs`, :mod:`~gpumodel.base.enums`, :mod:`~gpumodel.base.callmodule` - result displays, the
  named choices' base, modules that are also their main function.
"""
