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
MANS     := $(wildcard man/man1/*.1)

ifeq ($(CUDA_ON),1)
  CFLAGS  += -DDICE_CUDA=1 -I$(CUDA_HOME)/include
  LIB_OBJ += $(CU_SRC:.cu=.o)
  LDLIBS  += $(CUDA_LIBS)
endif

CPPFLAGS += -Ilib -DDICE_VERSION='"$(VERSION)"' -DDICE_SHAREDIR='"$(SHAREDIR)"'

all: $(PROGS)

lib/libdice.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $(LIB_OBJ)

lib/%.o: lib/%.c $(HDRS) config.mk
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

lib/cuda/%.o: lib/cuda/%.cu $(HDRS) $(wildcard lib/cuda/*.cuh) config.mk
	$(NVCC) $(NVCCFLAGS) -Ilib -c -o $@ $<

bin/%: cmd/%.c lib/libdice.a
	@mkdir -p bin
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< lib/libdice.a $(LDLIBS)

tests/bin/%: tests/lib/%.c tests/lib/test.h lib/libdice.a
	@mkdir -p tests/bin
	$(CC) $(CPPFLAGS) -Itests/lib $(CFLAGS) $(LDFLAGS) -o $@ $< lib/libdice.a $(LDLIBS)

tests/bin/gpu_%: tests/gpu/test_%.cu tests/lib/test.h lib/libdice.a
	@mkdir -p tests/bin
	$(NVCC) $(NVCCFLAGS) -Ilib -Itests/lib -DDICE_CUDA=1 -o $@ $< lib/libdice.a $(LDLIBS)

# deps: install on a fresh Debian what the build and the tests need; skips what is there.
DEPS_APT = libjansson-dev libarchive-dev libpcre2-dev pkg-config mandoc zstd xz-utils bzip2 zip python3-dev ninja-build
deps:
	@sh tests/deps.sh $(DEPS_APT)

check: deps all $(TESTS)
	@sh tests/run.sh

check-gpu: all $(GPUTESTS)
	@sh tests/run.sh --gpu

demo: deps all
	@sh share/examples/demo.sh

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
	rm -rf bin tests/bin lib/*.o lib/cuda/*.o lib/libdice.a dice-*.tar.gz

.PHONY: all deps check check-gpu demo lint-man install uninstall dist clean
.PRECIOUS: lib/%.o lib/cuda/%.o
