#include <criterion/criterion.h>
Test(placeholder, errors) { cr_assert(1); }
