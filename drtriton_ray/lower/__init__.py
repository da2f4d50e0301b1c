"""Reference lowering: every operator as Triton kernels, whole programs as ModelNew modules."""
