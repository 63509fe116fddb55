# Turns the text file IN into a C source OUT defining `const char SYM[]`.
file(READ "${IN}" content HEX)
string(LENGTH "${content}" hexlen)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${content}")
file(WRITE "${OUT}" "/* generated from ${IN}; do not edit */\nconst char ${SYM}[] = {${bytes}0x00};\n")
