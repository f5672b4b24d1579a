/* magic.h - the first bytes of a kiln engine file, shared by the engine reader/writer and
 * by anything that must tell an engine from an ONNX model (the ONNX reader's "this is an
 * engine, not a model" message, `kiln inspect`). */
#ifndef KILN_ENGINE_MAGIC_H
#define KILN_ENGINE_MAGIC_H

#define KILN_ENGINE_MAGIC "KILNENG1"
#define KILN_ENGINE_MAGIC_LEN 8

#endif
