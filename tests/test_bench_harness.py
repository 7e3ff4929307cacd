"""The benchmark harness names the CPU a table was measured on."""

from bench.harness import cpu_summary

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16
"""


def test_cpu_summary_names_the_model_and_the_vector_units_that_matter():
    assert cpu_summary(CPUINFO) == "AMD EPYC 9R14; avx2 avx512f avx512_vnni avx512_bf16"
    assert cpu_summary("model name : Old Xeon\nflags : sse2 avx avx2\n") == "Old Xeon; avx2"
    assert cpu_summary("flags : sse2\n") == "CPU unknown; no AVX2"
