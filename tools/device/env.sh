# Sourced on the device machine (repository root) after setup.sh: TF 2.21 in /tmp/site,
# CUDA 12's runtime, CUPTI and ptxas carried there; cuBLAS, cuDNN, cuFFT, cuSOLVER,
# cuSPARSE the image's CUDA 13 builds, linked under CUDA 12's names in standin/lib.
S=/tmp/site
export PYTHONPATH=$S:$PWD
export PATH=$S/bin:$S/nvidia/cuda_nvcc/bin:$PATH
export LD_LIBRARY_PATH=$S/nvidia/cuda_runtime/lib:$S/nvidia/cuda_cupti/lib:$S/nvidia/standin/lib:$(cat /tmp/libdirs 2>/dev/null)
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}
export PYTHONUNBUFFERED=1
# Triton GEMMs off: on 2026-11-24 XLA's first compilation never ended with them (ptxas
# 12.5 under autotuning); cuBLAS does every matmul. Set XLA_EXTRA to change it.
export XLA_FLAGS="--xla_gpu_cuda_data_dir=$S/nvidia/cuda_nvcc ${XLA_EXTRA---xla_gpu_enable_triton_gemm=false}"
