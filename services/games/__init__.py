"""Board games: rules, coordinates, encodings and symmetries.

Conventions shared by every module: a point is a flat index y * size + x, x the column from
the left (0 = 'a'), y the row from the bottom (0 = '1'); boards are int8 arrays board[y, x]
holding EMPTY=0, BLACK=1, WHITE=2.
"""
