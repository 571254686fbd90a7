"""The cuDNN backend: the op on CuPy arrays, through cuDNN 9's RNN API. Each module's docstring says its part::

    _backend        forward / backward / reserve_elements: the backend interface ops.py calls
    _layout_check   the params layout table against cuDNN's own answer (check_layout_against_cudnn)
    _cache          per device and thread: the handle, each network (descriptors, weight-space check,
                    dropout state) and each batch's plan (data descriptors, workspace, reserve size)
    _weight_space   where cuDNN puts every matrix and bias, against the layout table
    _settings       what is asked of cuDNN: precision per dtype, TF32, the algorithm, descriptor fields
    _dropout_rng    a layer's dropout RNG state, seeded once per GPU and advancing from step to step
    _streams        CuPy, devices, and the stream ordering of cached device arrays
    _descriptors    cuDNN objects with one owner each, and the bounded cache that owns them
    _lib            the C boundary: cuDNN 9 found and loaded, every prototype, every status

Each module imports only those below it. Importing this package loads nothing: ``ops`` imports
``_backend`` at the first call on CuPy arrays, and cuDNN's library loads then.
"""
