/* magic.h - the first bytes of every kiln engine file.
 *
 * Shared by the engine writer/reader (src/engine/) and the ONNX reader, which recognises
 * an engine passed where a model was expected and says what to do instead. Eight bytes,
 * no NUL: the format version follows in the engine header, not here.
 */
#ifndef KILN_ENGINE_MAGIC_H
#define KILN_ENGINE_MAGIC_H

#define KILN_ENGINE_MAGIC "KILNENG1"
#define KILN_ENGINE_MAGIC_LEN 8

#endif
