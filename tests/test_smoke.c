#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
static void convert_one_is_0x3c00(void) {
  EXPECT(amp_f32_to_f16(1.0f) == 0x3c00, "in 1.0 expected 0x3c00 got 0x%04x", amp_f32_to_f16(1.0f));
}
int main(void) { RUN(convert_one_is_0x3c00); TEST_END(); }
