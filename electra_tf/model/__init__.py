"""The ELECTRA generator and discriminator, built from keras-hub layers."""
