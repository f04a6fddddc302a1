/* tests/cuda_internal_kernels.c -- a program holding nothing but adsm itself, for
 * cuda_kernels_test.sh: adsm's own single-source kernels (translate.h's patch kernel, which
 * rewrites declared pointer fields on a GPU) must compile with the real NVRTC and ptxas and run on
 * the driver double like a program's. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

int main(void) { return 0; }
