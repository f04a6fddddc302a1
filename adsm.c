#define ADSM_IMPLEMENTATION
#include "adsm.h"
