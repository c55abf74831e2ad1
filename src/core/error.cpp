// error.cpp — anchors the Error vtable in one translation unit.
#include "core/error.h"
