# dice build configuration; edit here or override on the make command line.
VERSION   = 0.1.0

PREFIX    = /usr/local
MANPREFIX = $(PREFIX)/share/man
SHAREDIR  = $(PREFIX)/share/dice

CC        = cc
CFLAGS    = -O2 -g -std=c11 -D_GNU_SOURCE -pthread
LDFLAGS   = -pthread -Wl,--as-needed
LDLIBS    = -ljansson -larchive -lpcre2-8 -lm

# CUDA: auto (built when nvcc is found), 1 (required) or 0 (off).
CUDA      = auto
NVCC      = $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME = /usr/local/cuda
CUDA_ARCH = -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# NVCCEXTRA: more nvcc flags, e.g. -DDICE_TIMELINE (the batch-1 products' block timeline, a
# bench aid: bench/timeline.py; make clean first, the objects do not track flags)
NVCCEXTRA =
NVCCFLAGS = -O2 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC $(NVCCEXTRA)
CUDA_LIBS = -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
