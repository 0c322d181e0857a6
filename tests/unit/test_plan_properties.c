#include <criterion/criterion.h>
Test(placeholder, properties) { cr_assert(1); }
