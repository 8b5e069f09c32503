# cmake -DINPUT=file -DOUTPUT=file.cpp -DNAMESPACE=ns -DFUNCTION=fn -P EmbedText.cmake
# Writes a C++ source defining `std::string_view ns::fn()` returning INPUT's text.
file(READ "${INPUT}" text)
string(FIND "${text}" ")spyre_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter used to embed it")
endif()
file(WRITE "${OUTPUT}.tmp"
"// Generated from ${INPUT} by cmake/EmbedText.cmake; do not edit.
#include <string_view>
namespace ${NAMESPACE} {
std::string_view ${FUNCTION}() {
  static constexpr char text[] = R\"spyre_embed(${text})spyre_embed\";
  return {text, sizeof(text) - 1};
}
}  // namespace ${NAMESPACE}
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
