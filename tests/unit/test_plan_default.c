#include <criterion/criterion.h>
Test(placeholder, default) { cr_assert(1); }
