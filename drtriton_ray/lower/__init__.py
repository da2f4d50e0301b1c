"""Reference lowering: every operator as Triton kernels, whole programs as ModelNew modules.

By phase: `passes` (nodes merged where one kernel does both) -> `grouping` (fusion: the program cut into kernels) ->
`emit` (code generation, `lower_program` / `lower_source`), from each operator's registration in `lowerings` (its
wrapper call, fused kernel and setup, tuning key) or its expression in `elementwise`. The kernel library is
`kernels` and `wrappers`, carried into solutions by `library`, fused by `fuse` and trimmed by `specialize`; `tuning`
holds the launch configurations per GPU; `parse` reads a problem's source back into a program."""
